"""The data schemas: one class per data kind (``kind`` is the tag, chosen with ``data=<preset>``), each
holding only the fields its data module in ``attnlab.data`` reads. Fields that several kinds share
come from small bases:

    DataConfig          batching and the seed: every kind
    SequenceData        seq_len: the kinds made of token sequences
    TokenizedData       the tokenizer: the kinds that build one from their text
    GeneratedData       sizes of the sets attnlab generates from the seed
    CarvedData          val/test fractions carved from the training data
    SourcedData         a local path or a Hugging Face dataset to read (+ CarvedData)

The synthetic tasks' kinds are in ``schema.synthetic_data`` (``SyntheticData``: a task of data.seq_len
tokens with an exact answer), the images' in ``schema.image_data`` (``ImageData``: sizes, augmentation
and normalisation); ``attnlab.schema`` imports both, so every kind is registered in ``DATA``.

Paths are used as given (relative ones against the working directory of the process): a config file
may spell them with ``${oc.env:HOME}`` or ``${hydra:runtime.cwd}``. Nothing is ever written under
``path``; Hugging Face and torchvision caches go to ``cache_dir``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from attnlab.schema.choice import Choice, TaggedUnion
from attnlab.schema.errors import ConfigError, at_least_one, fraction, not_negative, show

# The label of a position that no loss or metric scores (padding, unmasked tokens, a document's end):
# torch's cross_entropy default, and Hugging Face's
IGNORE_INDEX = -100
# The key of an evaluation batch that only keeps a process's forwards in step with the other processes'
# (where every forward is a collective: FSDP), its value (B,) True: the task runs it and scores nothing
PADDING_BATCH = "padding_batch"
SPECIAL_TOKEN_COUNT = 7  # pad unk bos eos mask cls sep (attnlab.data.tokenizers.SPECIAL_TOKENS)


class DataKind(Choice):
    text = "text"
    listops = "listops"
    text_classification = "text_classification"
    pairs = "pairs"
    dates = "dates"
    numbers = "numbers"
    reverse = "reverse"
    copy = "copy"
    passkey = "passkey"
    recall = "recall"
    addition = "addition"
    repeated_segments = "repeated_segments"
    digits = "digits"
    images = "images"
    tokens = "tokens"


class Packing(Choice):
    """How ``data.kind=text`` lays documents into rows of ``data.seq_len`` tokens."""

    none = "none"  # windows over the documents joined into one text (they run into each other)
    documents = "documents"  # documents packed into windows, each token with its document's id
    padded = "padded"  # one document per row (long ones in pieces), padded to seq_len


DATA = TaggedUnion("data", "kind", "data=<a preset of kind {}>")


@dataclass(frozen=True)
class DataNeeds:
    """What a task needs from its data, whatever the kind: the special-token roles its batches carry
    (``attnlab.data.tokenizers.SPECIAL_TOKENS``), whether input tokens are masked for it (BERT's
    80/10/10), and whether it reads class labels. Each task's schema declares one
    (``TaskConfig.data_needs``); data modules receive it, never the task's name."""

    specials: tuple[str, ...] = ()
    masking: bool = False
    classes: bool = False


MOST_BATCH = 2**20  # samples a process draws a step: a million already exceeds any accelerator's memory


@dataclass
class DataConfig:
    """What every data module reads; ``kind`` is the tag."""

    kind: str = MISSING  # a str, not the DataKind enum: a kind registered outside attnlab has its own tag
    # The data module that reads this kind, as "module:class" in attnlab.data (imported on use, so that
    # choosing a kind loads no torch)
    module: ClassVar[str] = ""
    batch_size: int = 32
    num_workers: int = 0
    pin_memory: bool | None = None  # None: pinned exactly when the trainer runs on CUDA
    seed: int | None = None  # None: the run's seed

    def check(self) -> None:
        DATA.check_tag(self)
        at_least_one("data.batch_size", self.batch_size)
        if self.batch_size > MOST_BATCH:
            raise ConfigError(
                "data.batch_size",
                self.batch_size,
                f"at most {MOST_BATCH} samples a process: a larger batch fits in no device's memory "
                "(trainer.accumulate_grad_batches gives a larger batch a step)",
            )
        not_negative("data.num_workers", self.num_workers)
        if self.seed is not None and self.seed < 0:
            raise ConfigError("data.seed", self.seed, "must be 0 or more, or null for the run's seed")


@dataclass
class SequenceData(DataConfig):
    seq_len: int = 128  # block size for language models, max length for the others

    def check(self) -> None:
        super().check()
        at_least_one("data.seq_len", self.seq_len)


@dataclass
class TokenizedData(SequenceData):
    tokenizer: str = "char"  # char | bpe | path to a tokenizer.json (or a run directory holding one)
    bpe_vocab_size: int = 1024

    def check(self) -> None:
        super().check()
        if self.tokenizer == "bpe" and self.bpe_vocab_size < 256 + SPECIAL_TOKEN_COUNT:
            raise ConfigError(
                "data.bpe_vocab_size",
                self.bpe_vocab_size,
                f"is below the 256 bytes + {SPECIAL_TOKEN_COUNT} special tokens of a byte-level BPE; "
                f"use at least {256 + SPECIAL_TOKEN_COUNT}",
            )


@dataclass
class GeneratedData(DataConfig):
    num_train: int = 20000
    num_val: int = 1000
    num_test: int = 1000

    def check(self) -> None:
        super().check()
        for name in ("num_train", "num_val", "num_test"):
            at_least_one(f"data.{name}", getattr(self, name))


@dataclass
class CarvedData(DataConfig):
    val_fraction: float = 0.05  # carved from the training data where the source has no such split
    test_fraction: float = 0.05  # 0 with no test split in the source: the validation split is tested

    def check(self) -> None:
        super().check()
        fraction("data.val_fraction", self.val_fraction)
        fraction("data.test_fraction", self.test_fraction)
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ConfigError(
                "data.val_fraction",
                self.val_fraction,
                f"with data.test_fraction={self.test_fraction} leaves no training data",
            )


@dataclass
class SourcedData(CarvedData):
    """A kind that reads a local file or folder, or a Hugging Face dataset."""

    path: str | None = None  # a local file or folder
    hf_name: str | None = None  # a Hugging Face datasets name (online, cached), e.g. "wikitext"
    hf_config: str | None = None  # e.g. "wikitext-2-raw-v1"
    hf_data_files: str | None = None  # data_files for HF's generic builders: hf_name=text|csv|json|...
    cache_dir: str | None = None  # where Hugging Face (and torchvision) keep their downloads

    source_fields: ClassVar[tuple[str, ...]] = ("path", "hf_name")
    needs: ClassVar[str | None] = "data.path (a local file or folder) or data.hf_name"  # None: optional

    def sources(self) -> list[str]:
        return [name for name in self.source_fields if getattr(self, name)]

    def check(self) -> None:
        super().check()
        for name in self.source_fields:  # '' is no source: the run would quietly read the default one
            if getattr(self, name) == "":
                raise ConfigError(f"data.{name}", "''", "is empty: give one, or leave it unset (null)")
        sources = self.sources()
        if len(sources) > 1:
            raise ConfigError(
                f"data.{sources[1]}",
                getattr(self, sources[1]),
                f"and data.{sources[0]} are both set; give one",
            )
        if self.hf_data_files and not self.hf_name:
            raise ConfigError(
                "data.hf_data_files",
                self.hf_data_files,
                "needs data.hf_name (text, csv, json, imagefolder, ...)",
            )
        if not sources and self.needs:
            raise ConfigError("data.path", None, f"data.kind={self.kind} needs {self.needs}")


@DATA.register
@dataclass
class TextData(TokenizedData, SourcedData):
    """Running text for language models: the Python docs' prose by default (no path, no download)."""

    kind: DataKind = DataKind.text
    module: ClassVar[str] = "attnlab.data.text:TextDataModule"
    text_column: str = "text"  # of a Hugging Face dataset
    mlm_probability: float = 0.15  # masked language modelling: the share of tokens to predict
    packing: Packing = Packing.none
    document_mask: bool = True  # packing=documents: attend within each document (false: across them)
    document_separator: str | None = None  # splits a text into documents (data.path needs it to pack)

    needs: ClassVar[str | None] = None

    def check(self) -> None:
        super().check()
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError("data.mlm_probability", self.mlm_probability, "must be in (0, 1)")
        if self.document_separator == "":
            raise ConfigError("data.document_separator", "", "must be a non-empty string, or null")
        if not self.document_mask and self.packing != Packing.documents:
            raise ConfigError(
                "data.document_mask", False, f"applies to data.packing=documents only (not {self.packing})"
            )
        if self.packing != Packing.none and self.path is not None and self.document_separator is None:
            raise ConfigError(
                "data.packing",
                self.packing,
                f"needs document boundaries in data.path={self.path!r}: set data.document_separator "
                "(the text between two documents, e.g. '\\n\\n'); the default corpus and data.hf_name "
                "have them (topics, rows)",
            )


@DATA.register
@dataclass
class ListOpsData(SequenceData, GeneratedData):
    """ListOps (Nangia & Bowman 2018, LRA variant) generated from the seed: 10 classes."""

    kind: DataKind = DataKind.listops
    module: ClassVar[str] = "attnlab.data.classification:ListOpsDataModule"
    batch_size: int = 64
    listops_max_depth: int = 5
    listops_max_args: int = 6
    listops_op_prob: float = 0.3  # chance that an argument is itself an operation (LRA uses 0.25)

    def check(self) -> None:
        super().check()
        at_least_one("data.listops_max_depth", self.listops_max_depth)
        if self.listops_max_args < 2:
            raise ConfigError("data.listops_max_args", self.listops_max_args, "must be at least 2")
        fraction("data.listops_op_prob", self.listops_op_prob)


@DATA.register
@dataclass
class TextClassificationData(TokenizedData, SourcedData):
    """Labelled text from a CSV/TSV/JSONL file or folder, or a Hugging Face dataset."""

    kind: DataKind = DataKind.text_classification
    module: ClassVar[str] = "attnlab.data.classification:TextClassificationDataModule"
    seq_len: int = 256
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    text_column: str = "text"
    label_column: str = "label"


@DATA.register
@dataclass
class PairsData(TokenizedData, SourcedData):
    """Parallel text: two columns, or one column of {language: text} dicts (when the langs are set)."""

    kind: DataKind = DataKind.pairs
    module: ClassVar[str] = "attnlab.data.pairs:PairsDataModule"
    source_column: str = "source"
    target_column: str = "target"
    translation_column: str = "translation"
    source_lang: str | None = None
    target_lang: str | None = None

    def check(self) -> None:
        super().check()
        if (self.source_lang is None) != (self.target_lang is None):
            raise ConfigError(
                "data.source_lang",
                self.source_lang,
                f"with data.target_lang={show(self.target_lang)}: set both or neither",
            )


@dataclass
class GeneratedPairsData(TokenizedData, GeneratedData):
    """Source -> target pairs generated from the seed, read by the data module that reads real pairs."""

    module: ClassVar[str] = "attnlab.data.pairs:PairsDataModule"
    batch_size: int = 64


@DATA.register
@dataclass
class DatesData(GeneratedPairsData):
    """Dates in many human formats -> ISO 8601, generated from the seed."""

    kind: DataKind = DataKind.dates
    seq_len: int = 48


@DATA.register
@dataclass
class NumbersData(GeneratedPairsData):
    """Numbers (1 to 6 digits) -> English words, generated from the seed."""

    kind: DataKind = DataKind.numbers
    seq_len: int = 80


@DATA.register
@dataclass
class ReverseData(GeneratedPairsData):
    """Random strings of letters and digits -> the same string reversed, generated from the seed."""

    kind: DataKind = DataKind.reverse
    seq_len: int = 32
    reverse_max_len: int = 24

    def check(self) -> None:
        super().check()
        at_least_one("data.reverse_max_len", self.reverse_max_len)


def data_config(kind: str, **settings: object) -> DataConfig:
    """The data config of ``kind`` with ``settings`` (its other fields at the kind's defaults)."""
    return DATA.schema_of({"kind": kind})(**settings)
