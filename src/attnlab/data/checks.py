"""Bad data found early and named precisely.

``check_source`` is what the commands' validation calls before a run directory exists: cheap checks
that read no more than a header (the path is a regular file or folder, not empty, starts as UTF-8
text, has the columns; the tokenizer exists; a validation split can be carved). The checks that need
a whole file (``read_text_file``, ``check_record_file``) run when the data is read, and name the file
and line. Torch-free and ``datasets``-free, so validation stays fast.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from pathlib import Path

from attnlab.schema.data import CarvedData, DataConfig, SourcedData, TokenizedData
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import ModelConfig

RECORD_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
SPLIT_NAMES = {"train": ("train",), "val": ("val", "valid", "validation", "dev"), "test": ("test",)}
HEAD_BYTES = 1 << 16  # what a cheap check reads of a file
CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f]")  # control characters that text does not hold
CONTROL_SHARE = 0.01  # more of them than this share of the characters: not a text file
MAX_SHRINK = 2.0  # images shrunk by more than this lose what a classifier needs


# -- paths ------------------------------------------------------------------------------------


def existing(path: str | Path, key: str = "data.path") -> Path:
    """``path`` as a Path that exists and is a regular file or a folder (not a device, a pipe, ...)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{key}={str(path)!r}: no such file or folder ({p.resolve()})")
    if not (p.is_file() or p.is_dir()):
        raise ValueError(f"{key}={str(path)!r}: neither a regular file nor a folder")
    return p


def split_files(folder: Path, suffixes: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Files named after splits directly in ``folder`` (train.csv, valid.txt, test.jsonl, ...)."""
    found: dict[str, Path] = {}
    for f in sorted(folder.iterdir()):
        if not f.is_file() or (suffixes and f.suffix.lower() not in suffixes):
            continue
        for split, names in SPLIT_NAMES.items():
            if f.stem.lower() in names and split not in found:
                found[split] = f
    return found


def files_in(folder: Path) -> list[Path]:
    """Regular, non-hidden files under ``folder``, recursively, in sorted order."""
    files = sorted(
        f
        for f in folder.rglob("*")
        if f.is_file() and not any(part.startswith(".") for part in f.relative_to(folder).parts)
    )
    if not files:
        raise ValueError(f"data.path={str(folder)!r} is a folder without any files")
    return files


def text_files(path: str) -> dict[str, list[Path]]:
    """The files of each split of a text source: one file (train), a folder of train/valid/test files
    (e.g. wikitext's), or a folder of any files (train, in sorted order)."""
    root = existing(path)
    if root.is_file():
        return {"train": [root]}
    found = split_files(root)
    if "train" in found:
        return {split: [file] for split, file in found.items()}
    return {"train": files_in(root)}


def record_files(path: str) -> dict[str, Path]:
    """The record file of each split: one file (train), or a folder of train/val/test files."""
    root = existing(path)
    if root.is_file():
        return {"train": root}
    found = split_files(root, RECORD_SUFFIXES)
    if "train" not in found:
        raise ValueError(
            f"data.path={path!r} is a folder without a train file; expected train{{.csv,.tsv,.jsonl,.json}} "
            "and optionally val/valid/validation/dev and test files"
        )
    return found


def check_columns(columns: list[str], wanted: dict[str, str], where: str) -> None:
    """``wanted`` maps config keys to column names; a missing one is an error listing the available."""
    for key, column in wanted.items():
        if column not in columns:
            raise ValueError(
                f"{key}={column!r} is not a column of {where}; available: {', '.join(map(str, columns))}"
            )


# -- text -------------------------------------------------------------------------------------


def line_of(data: bytes | str, offset: int) -> int:
    """The 1-based line number of a byte (or character) offset."""
    return data.count(b"\n" if isinstance(data, bytes) else "\n", 0, offset) + 1


def decode_text(data: bytes, file: Path, final: bool = True) -> str:
    """``data`` (a file's bytes, or its head when not ``final``) as text, or an error naming the line of
    the first byte that makes it binary (NUL) or not UTF-8."""
    if (nul := data.find(b"\0")) >= 0:
        raise ValueError(f"{file}:{line_of(data, nul)}: not a text file (it holds NUL bytes)")
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{file}:{line_of(data, err.start)}: not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    controls = len(CONTROLS.findall(text))
    if controls > CONTROL_SHARE * max(len(text), 1):
        raise ValueError(
            f"{file}: not a text file ({controls} of its {len(text)} characters are control characters)"
        )
    return text


def read_text_file(file: Path) -> str:
    """A whole UTF-8 text file; empty, binary or undecodable files are errors naming the file (and line)."""
    text = decode_text(file.read_bytes(), file)
    if not text.strip():
        raise ValueError(f"{file} is empty")
    return text


def read_head(file: Path) -> str:
    """The first ``HEAD_BYTES`` of a file as text (a cheap check: empty, binary and non-UTF-8 refused)."""
    with open(file, "rb") as f:
        head = f.read(HEAD_BYTES)
    text = decode_text(head, file, final=len(head) < HEAD_BYTES)
    if not text.strip() and len(head) < HEAD_BYTES:
        raise ValueError(f"{file} is empty")
    return text


# -- records -------------------------------------------------------------------------------------


def check_record_file(file: Path, wanted: dict[str, str], where: str) -> None:
    """Every record of a CSV/TSV/JSON Lines (or JSON list) file has the wanted columns with a value,
    and each CSV/TSV row as many fields as the header; errors name the file and line."""
    suffix = file.suffix.lower()
    if suffix not in RECORD_SUFFIXES:
        raise ValueError(f"{file}: unsupported file type {suffix!r}; use one of {', '.join(RECORD_SUFFIXES)}")
    text = read_text_file(file)
    if suffix in (".csv", ".tsv"):
        _check_table(text, file, "," if suffix == ".csv" else "\t", wanted, where)
    elif suffix == ".json" and text.lstrip().startswith("["):
        _check_json_list(text, file, wanted, where)
    else:
        _check_json_lines(text, file, wanted, where)


def _check_table(text: str, file: Path, delimiter: str, wanted: dict[str, str], where: str) -> None:
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader)
    check_columns(header, wanted, f"{where} ({file})")
    positions = {column: header.index(column) for column in wanted.values()}
    rows = 0
    for row in reader:
        if not row:
            continue  # a blank line
        rows += 1
        line = reader.line_num
        if len(row) != len(header):
            separator = "tab" if delimiter == "\t" else "comma"
            raise ValueError(
                f"{file}:{line}: {len(row)} field(s) where the header has {len(header)} "
                f"(fields are separated by a {separator})"
            )
        for column, i in positions.items():
            if not row[i].strip():
                raise ValueError(f"{file}:{line}: no value in column {column!r}")
    if not rows:
        raise ValueError(f"{file} has a header row but no data rows")


def _check_record(record: object, where_line: str, wanted: dict[str, str], where: str, first: bool) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where_line}: every record must be a JSON object")
    if first:
        check_columns(list(record), wanted, where)
    for column in wanted.values():
        if record.get(column) is None or record.get(column) == "":
            raise ValueError(f"{where_line}: no value in column {column!r}")


def _check_json_lines(text: str, file: Path, wanted: dict[str, str], where: str) -> None:
    first = True
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{file}:{number}: not valid JSON ({err.msg})") from None
        _check_record(record, f"{file}:{number}", wanted, f"{where} ({file})", first)
        first = False


def _check_json_list(text: str, file: Path, wanted: dict[str, str], where: str) -> None:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(records, list) or not records:
        raise ValueError(f"{file}: a .json file must hold a non-empty list of objects (or JSON Lines)")
    for number, record in enumerate(records, start=1):
        _check_record(record, f"{file}: record {number}", wanted, f"{where} ({file})", number == 1)


def wanted_columns(cfg: DataConfig) -> dict[str, str]:
    """The columns a kind reads from records, keyed by the config key that names each."""
    if cfg.kind == "text_classification":
        return {"data.text_column": cfg.text_column, "data.label_column": cfg.label_column}
    if cfg.source_lang is not None:
        return {"data.translation_column": cfg.translation_column}
    return {"data.source_column": cfg.source_column, "data.target_column": cfg.target_column}


# -- images ---------------------------------------------------------------------------------------


def image_split_folders(root: Path) -> dict[str, Path]:
    """``root``/{train,val,test} where they exist, else the classes lie right under ``root`` (train)."""
    found = {}
    for split, names in SPLIT_NAMES.items():
        folder = next((root / n for n in names if (root / n).is_dir()), None)
        if folder is not None:
            found[split] = folder
    return found if "train" in found else {"train": root}


def class_folders(folder: Path) -> list[str]:
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise ValueError(
            f"{folder} has no class folders; data.kind=images expects <data.path>/<class>/<image files>"
        )
    return classes


def images_in(folder: Path) -> list[Path]:
    """The image files of a class folder, in sorted order."""
    return sorted(f for f in folder.glob("*") if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)


def check_shrink(width: int, height: int, example: Path, model: ModelConfig) -> None:
    """Refuse a resize to ``model.image_size`` that shrinks images by more than ``MAX_SHRINK``, naming a
    size that keeps them (with the same number of patches per side)."""
    side, size = min(width, height), model.image_size
    if side <= MAX_SHRINK * size:
        return
    per_side = max(size // model.patch_size, 1)
    suggested = max(side // per_side * per_side, per_side)
    raise ConfigError(
        "model.image_size",
        size,
        f"the images are {width}x{height} (e.g. {example}), so resizing them to {size}x{size} shrinks them "
        f"{side / size:.0f}x and loses their detail; set model.image_size={suggested} "
        f"model.patch_size={suggested // per_side} (or any size within {MAX_SHRINK:.0f}x of the images)",
    )


def _check_image_folder(root: Path, cfg: DataConfig, model: ModelConfig | None) -> None:
    from PIL import Image, UnidentifiedImageError

    if not root.is_dir():
        raise ValueError(
            f"data.path={cfg.path!r} is a file; data.kind=images needs a folder of class folders"
        )
    train = image_split_folders(root)["train"]
    for name in class_folders(train):
        files = images_in(train / name)
        if not files:
            continue
        try:
            with Image.open(files[0]) as image:
                width, height = image.size
        except (UnidentifiedImageError, OSError) as err:
            raise ValueError(f"{files[0]} is not a readable image ({type(err).__name__})") from None
        if model is not None:
            check_shrink(width, height, files[0], model)


# -- the cheap checks of validation --------------------------------------------------------------------


def check_tokenizer_file(path: str) -> None:
    """ConfigError naming ``data.tokenizer`` unless ``path`` reads as a tokenizer (bounded in size and
    nesting: ``load_tokenizer``)."""
    from attnlab.data.tokenizers import load_tokenizer

    try:
        load_tokenizer(path)
    except (OSError, ValueError) as err:
        raise ConfigError("data.tokenizer", path, str(err).splitlines()[0]) from None


def check_source(cfg: DataConfig, model: ModelConfig | None = None) -> None:
    """What can be checked of ``data`` before a run starts, reading at most the head of each file: the
    path, the files' first bytes and header rows, the tokenizer, whether a validation split can be
    carved, and (with the ``model``) whether images fit ``model.image_size``."""
    if cfg.kind == "tokens":  # a folder attnlab-prepare wrote, or nanoGPT's / llm.c's .bin files
        from attnlab.data.shards import check_prepared

        check_prepared(cfg)
        return
    if isinstance(cfg, SourcedData) and cfg.path is not None:
        path = existing(cfg.path)
        if cfg.kind == "images":
            _check_image_folder(path, cfg, model)
        elif cfg.kind == "text":
            for files in text_files(cfg.path).values():
                for file in files:
                    read_head(file)
        else:
            _check_record_heads(cfg)
    if (
        isinstance(cfg, TokenizedData)
        and cfg.tokenizer not in ("char", "bpe")
        and not Path(cfg.tokenizer).exists()
    ):
        raise ConfigError(
            "data.tokenizer",
            cfg.tokenizer,
            "choose char, bpe, or a tokenizer.json (or a run directory holding one)",
        )
    if isinstance(cfg, TokenizedData) and cfg.tokenizer not in ("char", "bpe"):
        check_tokenizer_file(cfg.tokenizer)
    hf_name = cfg.hf_name if isinstance(cfg, SourcedData) else None
    if isinstance(cfg, CarvedData) and cfg.val_fraction == 0 and not hf_name and not _has_val(cfg):
        raise ConfigError(
            "data.val_fraction",
            cfg.val_fraction,
            "the validation split is carved from the training data (the source has no val split): "
            "must be above 0, e.g. 0.05",
        )


def _check_record_heads(cfg: DataConfig) -> None:
    for file in record_files(cfg.path).values():
        if file.suffix.lower() not in RECORD_SUFFIXES:
            raise ValueError(
                f"{file}: unsupported file type {file.suffix!r}; use one of {', '.join(RECORD_SUFFIXES)}"
            )
        lines = read_head(file).split("\n")
        where = f"data.path={cfg.path!r} ({file})"
        if file.suffix.lower() in (".csv", ".tsv"):
            header = next(csv.reader(lines[:1], delimiter="," if file.suffix.lower() == ".csv" else "\t"))
            check_columns(header, wanted_columns(cfg), where)
        elif lines[0].lstrip().startswith("{") and len(lines) > 1:  # a whole first JSON line
            try:
                check_columns(list(json.loads(lines[0])), wanted_columns(cfg), where)
            except json.JSONDecodeError as err:
                raise ValueError(f"{file}:1: not valid JSON ({err.msg})") from None


def _has_val(cfg: DataConfig) -> bool:
    """Whether the source has a validation split of its own (a val file or folder)."""
    if not isinstance(cfg, SourcedData) or cfg.path is None:
        return False
    root = Path(cfg.path)
    if root.is_file():
        return False
    if cfg.kind == "images":
        return "val" in image_split_folders(root)
    return "val" in split_files(root)
